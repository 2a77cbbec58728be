"""Float values -> unsigned integer sorter keys (bit-exact reference for the hardware).

For non-negative IEEE floats the raw bit pattern orders like the value, so magnitudes sort as
unsigned integers. Keys narrower than the format keep its most significant bits (a monotone,
non-decreasing map: values that differ only in dropped bits tie, and ties go to the lower index).
Signed scores (estimated logits) use the standard order-preserving map: negative values have
all bits inverted, non-negative values get the sign bit set.
"""

from __future__ import annotations

import torch

from hikv.params import KeyFormat, ParamError

__all__ = ["float_to_key", "format_bits"]


def format_bits(fmt: KeyFormat) -> int:
    return {KeyFormat.FP16: 16, KeyFormat.BF16: 16}[fmt]


def _bits16(x: torch.Tensor, fmt: KeyFormat) -> torch.Tensor:
    """16-bit patterns (as int32, 0..65535) of ``x`` in ``fmt``."""
    if fmt is KeyFormat.FP16:
        b = x.to(torch.float16).view(torch.int16).to(torch.int32)
    else:  # BF16 by truncation of fp32 towards zero: the top half of the fp32 pattern
        b = x.to(torch.float32).view(torch.int32) >> 16
    return b & 0xFFFF


def float_to_key(x: torch.Tensor, fmt: KeyFormat, width: int, *, signed: bool = False
                 ) -> torch.Tensor:
    """Unsigned ``width``-bit keys (int64) that order like ``x``.

    ``fmt`` FP16/BF16: ``x`` is a float tensor; without ``signed`` it must be non-negative
    (use ``x.abs()`` for magnitudes). ``fmt`` UINT: ``x`` holds integers in
    ``[0, 2**width)``. NaN is rejected; -0.0 is treated as +0.0.
    """
    if not 1 <= width <= 32:
        raise ParamError(f"key width = {width} is out of range: allowed [1, 32]")
    if fmt is KeyFormat.UINT:
        if x.is_floating_point():
            if not torch.equal(x, x.round()):
                raise ParamError("UINT keys must be integers")
        xi = x.to(torch.int64)
        if xi.numel() and (int(xi.min()) < 0 or int(xi.max()) >= 1 << width):
            raise ParamError(f"UINT keys must lie in [0, {1 << width}), got "
                             f"[{int(xi.min())}, {int(xi.max())}]")
        return xi
    if not x.is_floating_point():
        raise ParamError(f"{fmt.value} keys need a float tensor, not {x.dtype}")
    if torch.isnan(x).any():
        raise ParamError("cannot make a sorter key of NaN")
    if width > 16:
        raise ParamError(f"key width = {width} is out of range for {fmt.value}: allowed [1, 16]")
    x = torch.where(x == 0, torch.zeros_like(x), x)  # -0.0 -> +0.0
    if not signed and bool((x < 0).any()):
        raise ParamError("unsigned float keys need non-negative values (pass x.abs(), "
                         "or signed=True for estimated scores)")
    b = _bits16(x, fmt)
    if signed:
        b = torch.where(b & 0x8000 != 0, b ^ 0xFFFF, b | 0x8000)
    else:
        b = b & 0x7FFF
    return (b >> (16 - width)).to(torch.int64)
