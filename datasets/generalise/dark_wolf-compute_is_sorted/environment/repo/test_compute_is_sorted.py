from dark_wolf.utils import compute_is_sorted


def test_compute_is_sorted():
    assert compute_is_sorted([1, 2, 3]) == True
    assert compute_is_sorted([3, 1]) == False
