from dark_ibis.lib import count_positive


def test_count_positive():
    assert count_positive([0, 1, -2, 3]) == 2
