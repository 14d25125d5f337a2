from calm_seal.tools import total_length_value


def test_total_length_value():
    assert total_length_value(['ab', 'cde']) == 5
    assert total_length_value([]) == 0


def test_total_length_value_hidden():
    assert total_length_value(['x']) == 1
    assert total_length_value(['hello', 'hi']) == 7
    assert total_length_value(['', 'abc']) == 3
