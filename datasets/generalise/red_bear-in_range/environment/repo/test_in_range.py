from red_bear.ops import in_range


def test_in_range():
    assert in_range(0, 0, 5) == True
    assert in_range(5, 0, 5) == False
