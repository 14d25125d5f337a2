from merry_hawk.ops import capitalize_value


def test_capitalize_value():
    assert capitalize_value('hello') == 'Hello'
    assert capitalize_value('') == ''
