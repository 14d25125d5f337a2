from merry_hawk.ops import capitalize_value


def test_capitalize_value():
    assert capitalize_value('hello') == 'Hello'
    assert capitalize_value('') == ''


def test_capitalize_value_hidden():
    assert capitalize_value('a') == 'A'
    assert capitalize_value('world') == 'World'
    assert capitalize_value('xY') == 'XY'
