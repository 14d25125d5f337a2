from bold_mole.lib import get_in_range


def test_get_in_range():
    assert get_in_range(0, 0, 5) == True
    assert get_in_range(5, 0, 5) == False
