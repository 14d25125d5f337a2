from bold_goat.utils import compute_min_list


def test_compute_min_list():
    assert compute_min_list([3, 9, 2]) == 2
    assert compute_min_list([5]) == 5


def test_compute_min_list_hidden():
    assert compute_min_list([4, 6, 8]) == 4
    assert compute_min_list([-5, -2]) == -5
    assert compute_min_list([7, 1, 9]) == 1
