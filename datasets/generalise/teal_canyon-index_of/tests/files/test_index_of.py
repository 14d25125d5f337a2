from teal_canyon.shared import index_of


def test_index_of():
    assert index_of([4, 5, 6], 6) == 2
    assert index_of([1, 2], 9) == -1


def test_index_of_hidden():
    assert index_of([], 1) == -1
    assert index_of([7, 8], 7) == 0
    assert index_of([3, 3, 4], 4) == 2
