"""The HiKV units over a published accelerator's area (NVDLA's configurations of the NVDLA
Primer, hikv/sim/data/published_areas.json): the cited table, the node scaling, the shares and the
comparable configuration."""

from __future__ import annotations

import math

import pytest
from cost_helpers import cells_or_skip

from hikv.presets import get_preset
from hikv.sim.eda.area import AcceleratorArea, AreaItem
from hikv.sim.eda.published import (
    denominator_share,
    denominator_shares,
    published_area_at_node_m2,
    published_denominator,
)
from hikv.sim.tech import load_data, node_area_scale

#: the table as printed in the NVDLA Primer, 'Example Area and Performance with NVDLA':
#: (# MACs, conv. buffer KB, SDRAM GB/s, silicon area mm^2 at 28 nm, int8 ResNet-50 fps)
PRIMER = [(2048, 512, 20, 5.5, 269), (1024, 256, 15, 3.0, 153), (512, 256, 10, 2.3, 93),
          (256, 256, 5, 1.7, 46), (128, 256, 2, 1.4, 20), (64, 128, 1, 0.91, 7.3),
          (32, 128, 0.5, 0.85, 3.6)]


def _area(tech_nm: int, hikv_m2: float, missing: tuple[str, ...] = ()) -> AcceleratorArea:
    base = AreaItem("MAC lane", 4, 1e-7, 100.0, "test")
    return AcceleratorArea(tech_nm=tech_nm, baseline=(base,),
                           hikv=(AreaItem("sorter", 1, hikv_m2, 50.0, "test"),), missing=missing)


def test_data_file_holds_the_primer_table_with_its_source():
    den = load_data("published_areas.json")["denominator"]
    assert den["available"] is True and den["tech_nm"] == 28
    assert "primer.rst" in den["source"] and "nvdla/doc" in den["source"]
    rows = [(c["macs"], c["conv_buffer_kb"], c["sdram_gb_per_s"], c["area_m2"] * 1e6,
             c["resnet50_int8_fps"]) for c in den["configurations"]]
    assert [r[:3] + r[4:] for r in rows] == [r[:3] + r[4:] for r in PRIMER]
    assert [r[3] for r in rows] == pytest.approx([r[3] for r in PRIMER])
    assert den["macs_per_16bit_mac"] == 2 and "1024 16-bit" in den["macs_per_16bit_mac_source"]
    assert den["searched"] and den["scope"]


def test_node_scaling_of_a_published_area():
    a = 3e-6
    assert published_area_at_node_m2(a, 28, 28) == pytest.approx(a)
    assert published_area_at_node_m2(a, 28, 16) == pytest.approx(
        a * node_area_scale(16) / node_area_scale(28))
    assert published_area_at_node_m2(a, 45, 7) == pytest.approx(a * node_area_scale(7))
    k40 = load_data("published_areas.json")["node_scaling"]["from_40nm_to_45nm_area"]
    assert published_area_at_node_m2(a, 40, 28) == pytest.approx(a * k40 * node_area_scale(28))


@pytest.mark.parametrize("tech_nm", [28, 16])
def test_shares_are_hikv_over_each_configuration_at_the_node(tech_nm):
    hikv = 0.5e-6
    shares = denominator_shares(_area(tech_nm, hikv))
    assert [s.macs for s in shares] == [r[0] for r in PRIMER]
    scale = node_area_scale(tech_nm) / node_area_scale(28)
    for s, r in zip(shares, PRIMER, strict=True):
        pub = r[3] * 1e-6 * scale
        assert s.tech_nm == tech_nm and s.published_tech_nm == 28
        assert s.published_m2 == pytest.approx(pub)
        assert s.over_published == pytest.approx(hikv / pub)
        assert s.share == pytest.approx(hikv / (pub + hikv))
        assert s.macs_16bit == r[0] / 2 and s.baseline_m2 == pytest.approx(4e-7)


def test_shares_are_nan_while_a_hikv_block_is_missing():
    for s in denominator_shares(_area(28, 1e-7, missing=("scorer",))):
        assert math.isnan(s.over_published) and math.isnan(s.share)


@pytest.mark.parametrize("lanes,macs", [(512, 1024), (1024, 2048), (4096, 2048), (8, 32),
                                        (96, 256), (90, 128)])
def test_comparable_configuration_is_nearest_in_16bit_macs(lanes, macs):
    class _Accel:
        pe_lanes = lanes

    class _Cfg:
        accel = _Accel()

    assert denominator_share(_Cfg(), _area(28, 1e-7)).macs == macs


def test_record_and_text_without_and_with_an_area():
    den = published_denominator()
    assert den["available"] and den["source"] in den["text"]
    assert den["shares"] == [] and den["comparable"] is None
    area = _area(28, 0.5e-6)
    cfg = get_preset("default")
    den = published_denominator(area, cfg)
    assert len(den["shares"]) == len(PRIMER)
    assert den["comparable"]["macs"] == 1024
    assert den["comparable"]["hikv_share"] == pytest.approx(0.5 / 3.5)
    assert "| 1024 MACs, 256 KB convolution buffer (nearest to the PE lanes) | 3 |" in den["text"]
    assert "14.3%" in den["text"] and "16.7%" in den["text"]


@pytest.mark.parametrize("preset", ["default", "paper"])
def test_named_presets_use_the_reports_hikv_area(preset):
    cells_or_skip()
    from hikv.sim.eda.area import accelerator_area

    cfg = get_preset(preset)
    ar = accelerator_area(cfg)
    s = denominator_share(cfg, ar)
    assert s.hikv_m2 == pytest.approx(ar.hikv_m2) and s.baseline_m2 == pytest.approx(ar.baseline_m2)
    assert s.macs_16bit == cfg.accel.pe_lanes
    assert 0 < s.share < 1 and s.over_published == pytest.approx(ar.hikv_m2 / s.published_m2)

