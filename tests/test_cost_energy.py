"""Energy tables and component energy functions (hikv.sim.cost.energy), node scaling
(hikv.sim.tech)."""

from __future__ import annotations

import numpy as np
import pytest

from hikv.params import MemoryType, ParamError
from hikv.sim import tech
from hikv.sim.cost import energy as E


def test_reference_values_are_the_cited_ones():
    t = E.load_tables()
    pj = {k: v * 1e12 for k, v in t.action_j_45nm.items()}
    expect = {"int8_add": 0.03, "int16_add": 0.05, "int32_add": 0.1, "int8_mult": 0.2,
              "int32_mult": 3.1, "fp16_add": 0.4, "fp32_add": 0.9, "fp16_mult": 1.1,
              "fp32_mult": 3.7}
    for k, v in expect.items():
        assert pj[k] == pytest.approx(v), k
    assert [(c, e * 1e12) for c, e in t.sram_points] == [
        (8192, pytest.approx(10)), (32768, pytest.approx(20)), (1048576, pytest.approx(100))]
    assert {k: v * 1e12 for k, v in t.dram_j_per_bit.items()} == {
        "hbm2": pytest.approx(3.9), "lpddr4": pytest.approx(8), "gddr5": pytest.approx(14),
        "ddr3": pytest.approx(70)}
    assert t.node_energy == {45: 1.0, 28: 0.51, 16: 0.17, 7: 0.094}
    assert t.node_area == {45: 1.0, 28: 0.38, 16: 0.19, 7: 0.059}
    assert "Horowitz" in t.sources["actions"] and "Stillmaker" in t.sources["node"]


def test_every_action_is_labelled_reference_or_derived():
    data = tech.load_data("energy_actions_45nm.json")
    for name, a in data["actions"].items():
        assert a["origin"] in ("reference", "derived"), name
        if a["origin"] == "derived":
            assert a.get("note"), name
    # the derived int16 multiply is the geometric mean of int8 and int32 (log-log in width)
    a = data["actions"]
    assert a["int16_mult"]["energy_j"] == pytest.approx(
        (a["int8_mult"]["energy_j"] * a["int32_mult"]["energy_j"]) ** 0.5, rel=1e-3)


def test_sram_interpolation_hits_points_and_is_monotone():
    for cap, ej in E.load_tables().sram_points:
        assert E.sram_access_energy_j(cap) == pytest.approx(ej)
    caps = np.geomspace(1024, 8 * 2**20, 50)
    e = E.sram_access_energy_j(caps)
    assert np.all(np.diff(e) > 0)
    # log-log midpoint between 8 KiB and 32 KiB is the geometric mean of 10 and 20 pJ
    assert E.sram_access_energy_j(16384) == pytest.approx(np.sqrt(10 * 20) * 1e-12)
    assert E.sram_access_energy_j(32768, 28) == pytest.approx(20e-12 * 0.51)


def test_node_scaling_and_errors():
    assert E.action_energy_j("fp16_mult", 7) == pytest.approx(1.1e-12 * 0.094)
    np.testing.assert_allclose(tech.node_area_scale(np.array([45, 28, 16, 7])),
                               [1.0, 0.38, 0.19, 0.059])
    with pytest.raises(ParamError, match="tech_nm"):
        tech.node_energy_scale(22)
    with pytest.raises(ParamError, match="unknown action"):
        E.action_energy_j("fp64_mult")
    with pytest.raises(ParamError, match="capacity"):
        E.sram_access_energy_j(0)
    with pytest.raises(ParamError, match="memory"):
        E.dram_energy_j_per_byte("sram")


def test_component_functions_are_counts_times_energy():
    assert E.dram_energy_j_per_byte(MemoryType.HBM2) == pytest.approx(8 * 3.9e-12)
    assert E.dram_energy_j(1000, "ddr3") == pytest.approx(1000 * 8 * 70e-12)
    assert E.mac_energy_j(10, 45) == pytest.approx(10 * (1.1 + 0.9) * 1e-12)
    sm = sum(n * E.load_tables().action_j_45nm[a] for a, n in E.SOFTMAX_ACTIONS.items())
    assert E.softmax_energy_j(3, 28) == pytest.approx(3 * sm * 0.51)
    assert E.sram_energy_j(64, 64, 8192, 45) == pytest.approx(16 * 10e-12)
    assert E.sorter_energy_j(4, 16, 45) == pytest.approx(4 * 0.05e-12)
    assert E.sorter_energy_j(4, 8, 45) == pytest.approx(4 * 0.03e-12)
    assert E.loader_energy_j(2, 10, 45) == pytest.approx(14 * 0.1e-12)
    # vectorised: arrays broadcast
    v = E.mac_energy_j(np.array([1, 2, 3]), np.array([45, 28, 7]))
    np.testing.assert_allclose(v, np.array([1, 2 * 0.51, 3 * 0.094]) * 2e-12)
