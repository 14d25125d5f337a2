from grand_goat.ops import compute_total_length


def test_compute_total_length():
    assert compute_total_length(['ab', 'cde']) == 5
    assert compute_total_length([]) == 0
