from calm_seal.tools import total_length_value


def test_total_length_value():
    assert total_length_value(['ab', 'cde']) == 5
    assert total_length_value([]) == 0
