from red_bear.ops import in_range


def test_in_range():
    assert in_range(0, 0, 5) == True
    assert in_range(5, 0, 5) == False


def test_in_range_hidden():
    assert in_range(3, 0, 5) == True
    assert in_range(-1, 0, 5) == False
    assert in_range(2, 2, 3) == True
