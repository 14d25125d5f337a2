from lazy_mole.core import total_length


def test_total_length():
    assert total_length(['ab', 'cde']) == 5
    assert total_length([]) == 0
