from dark_crab.tools import get_capitalize


def test_get_capitalize():
    assert get_capitalize('hello') == 'Hello'
    assert get_capitalize('') == ''


def test_get_capitalize_hidden():
    assert get_capitalize('a') == 'A'
    assert get_capitalize('world') == 'World'
    assert get_capitalize('xY') == 'XY'
