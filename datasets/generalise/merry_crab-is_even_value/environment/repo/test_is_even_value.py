from merry_crab.ops import is_even_value


def test_is_even_value():
    assert is_even_value(4) == True
    assert is_even_value(7) == False
