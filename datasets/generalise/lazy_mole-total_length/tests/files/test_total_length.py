from lazy_mole.core import total_length


def test_total_length():
    assert total_length(['ab', 'cde']) == 5
    assert total_length([]) == 0


def test_total_length_hidden():
    assert total_length(['x']) == 1
    assert total_length(['hello', 'hi']) == 7
    assert total_length(['', 'abc']) == 3
