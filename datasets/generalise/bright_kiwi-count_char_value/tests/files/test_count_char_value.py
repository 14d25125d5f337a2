from bright_kiwi.lib import count_char_value


def test_count_char_value():
    assert count_char_value('hello', 'l') == 2
    assert count_char_value('', 'x') == 0


def test_count_char_value_hidden():
    assert count_char_value('abc', 'z') == 0
    assert count_char_value('aaaa', 'a') == 4
    assert count_char_value('banana', 'n') == 2
