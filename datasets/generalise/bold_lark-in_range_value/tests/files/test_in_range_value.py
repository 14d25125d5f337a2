from bold_lark.funcs import in_range_value


def test_in_range_value():
    assert in_range_value(0, 0, 5) == True
    assert in_range_value(5, 0, 5) == False


def test_in_range_value_hidden():
    assert in_range_value(3, 0, 5) == True
    assert in_range_value(-1, 0, 5) == False
    assert in_range_value(2, 2, 3) == True
