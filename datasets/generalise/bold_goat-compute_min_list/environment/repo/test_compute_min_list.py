from bold_goat.utils import compute_min_list


def test_compute_min_list():
    assert compute_min_list([3, 9, 2]) == 2
    assert compute_min_list([5]) == 5
