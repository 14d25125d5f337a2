from happy_lark.ops import starts_with_value


def test_starts_with_value():
    assert starts_with_value('hello', 'he') == True
    assert starts_with_value('abc', 'b') == False
