from coral_harbor.routines import compute_sum_list


def test_compute_sum_list():
    assert compute_sum_list([1, 2, 3]) == 6
    assert compute_sum_list([]) == 0
