from geometry.rect_area import rect_area


def test_rect_area():
    assert rect_area(3, 4) == 12
    assert rect_area(2, 2) == 4
