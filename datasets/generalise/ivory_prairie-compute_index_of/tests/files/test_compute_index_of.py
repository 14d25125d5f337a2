from ivory_prairie.kernel import compute_index_of


def test_compute_index_of():
    assert compute_index_of([4, 5, 6], 6) == 2
    assert compute_index_of([1, 2], 9) == -1


def test_compute_index_of_hidden():
    assert compute_index_of([], 1) == -1
    assert compute_index_of([7, 8], 7) == 0
    assert compute_index_of([3, 3, 4], 4) == 2
