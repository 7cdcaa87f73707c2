import pytest

from wayline.core.errors import RejectedInput
from wayline.recon.periods import Periods, window_start


def test_windows_are_aligned_to_o_from_the_epoch() -> None:
    assert [window_start(t, 60_000) for t in (0, 59_999, 60_000, 125_000, -1)] == [0, 0, 60_000, 120_000, -60_000]


def test_n_may_not_exceed_m() -> None:
    with pytest.raises(RejectedInput, match="n .* may not exceed m"):
        Periods(o=60_000, n=120_000, m=60_000, z=60_000)


@pytest.mark.parametrize("name", ["o", "n", "m", "z"])
def test_each_period_has_bounds(name: str) -> None:
    good = {"o": 60_000, "n": 10_000, "m": 60_000, "z": 60_000}
    with pytest.raises(RejectedInput, match=f"periods.{name}: must be between"):
        Periods(**{**good, name: 30 * 86_400_000})
