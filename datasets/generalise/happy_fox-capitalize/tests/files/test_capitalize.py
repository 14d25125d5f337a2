from happy_fox.helpers import capitalize


def test_capitalize():
    assert capitalize('hello') == 'Hello'
    assert capitalize('') == ''


def test_capitalize_hidden():
    assert capitalize('a') == 'A'
    assert capitalize('world') == 'World'
    assert capitalize('xY') == 'XY'
