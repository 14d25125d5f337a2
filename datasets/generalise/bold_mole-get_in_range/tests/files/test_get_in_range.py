from bold_mole.lib import get_in_range


def test_get_in_range():
    assert get_in_range(0, 0, 5) == True
    assert get_in_range(5, 0, 5) == False


def test_get_in_range_hidden():
    assert get_in_range(3, 0, 5) == True
    assert get_in_range(-1, 0, 5) == False
    assert get_in_range(2, 2, 3) == True
