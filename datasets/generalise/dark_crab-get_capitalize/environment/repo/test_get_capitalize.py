from dark_crab.tools import get_capitalize


def test_get_capitalize():
    assert get_capitalize('hello') == 'Hello'
    assert get_capitalize('') == ''
