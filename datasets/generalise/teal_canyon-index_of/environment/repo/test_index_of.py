from teal_canyon.shared import index_of


def test_index_of():
    assert index_of([4, 5, 6], 6) == 2
    assert index_of([1, 2], 9) == -1
