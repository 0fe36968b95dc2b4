"""A GPU under a board power limit: the clock it sustains and the power it draws.

Datacenter GPUs are often run below their rated board power (``nvidia-smi -pl``; Meta's Grand
Teton H100s at 500 W of the SXM5 board's 700 W, sites that cap power to fit a building's
budget). Under a tensor-core-bound load the board is power-limited, so a lower limit lowers
the sustained clock, and every tensor-core rate with it. These scalar rules are applied when a
scenario is packed (:meth:`trainscape.spec.models.GpuSpec.peak_for`), so the C, numba and
Python kernels all see the derated peak.
"""

from __future__ import annotations


def power_limited_clock_fraction(limit_w: float, rated_w: float, exponent: float) -> float:
    """Sustained tensor-core clock under a board power limit of ``limit_w`` as a fraction of
    the clock at the part's rated power ``rated_w``:

        (limit_w / rated_w) ** (1 / exponent)

    CMOS switching power is ``P = a C V^2 f`` and dynamic voltage-frequency scaling lowers the
    supply voltage roughly in step with the clock, so a power-limited chip's power grows about
    as the cube of its clock (``exponent`` 3; Weste and Harris, *CMOS VLSI Design*, 4th ed.,
    §5.1-5.2). ``exponent`` is per GPU type (``power_clock_exponent`` in the presets): on GH100
    NVIDIA's own ratings of the same 132-SM die give 3.31 -- H100 SXM5 at 700 W is rated 989.4
    dense BF16 TFLOP/s, H100 NVL at 400 W 835.5 (H100 datasheet), and
    ``ln(700 / 400) / ln(989.4 / 835.5) = 3.31``. No limit (``limit_w`` 0) or one at or above
    the rated power: 1 (a limit above the rating never binds)."""
    if limit_w <= 0.0 or rated_w <= 0.0 or limit_w >= rated_w:
        return 1.0
    return (limit_w / rated_w) ** (1.0 / exponent)


def drawn_power_w(rated_w: float, limit_w: float) -> float:
    """Power one GPU draws while training, for the energy per step: the rated board power
    (the upper bound the presets cite), or the power limit where one is set below it -- a
    power-limited training load runs at its limit."""
    if limit_w > 0.0 and (rated_w <= 0.0 or limit_w < rated_w):
        return limit_w
    return rated_w
