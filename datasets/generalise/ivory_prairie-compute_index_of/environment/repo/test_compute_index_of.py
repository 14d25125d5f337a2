from ivory_prairie.kernel import compute_index_of


def test_compute_index_of():
    assert compute_index_of([4, 5, 6], 6) == 2
    assert compute_index_of([1, 2], 9) == -1
