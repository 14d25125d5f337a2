from happy_fox.helpers import capitalize


def test_capitalize():
    assert capitalize('hello') == 'Hello'
    assert capitalize('') == ''
