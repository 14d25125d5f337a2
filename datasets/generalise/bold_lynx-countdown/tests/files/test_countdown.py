from bold_lynx.core import countdown


def test_countdown():
    assert countdown(3) == [3, 2, 1]
    assert countdown(1) == [1]


def test_countdown_hidden():
    assert countdown(0) == []
    assert countdown(2) == [2, 1]
    assert countdown(5) == [5, 4, 3, 2, 1]
