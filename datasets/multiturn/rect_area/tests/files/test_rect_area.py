from geometry.rect_area import rect_area


def test_rect_area():
    assert rect_area(3, 4) == 12
    assert rect_area(2, 2) == 4


def test_rect_area_hidden():
    assert rect_area(5, 1) == 5
    assert rect_area(0, 7) == 0
    assert rect_area(6, 3) == 18
