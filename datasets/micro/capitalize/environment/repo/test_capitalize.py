from capitalize import capitalize


def test_capitalize():
    assert capitalize('hello') == 'Hello'
    assert capitalize('') == ''
