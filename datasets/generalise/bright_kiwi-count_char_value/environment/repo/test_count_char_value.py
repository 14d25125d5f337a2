from bright_kiwi.lib import count_char_value


def test_count_char_value():
    assert count_char_value('hello', 'l') == 2
    assert count_char_value('', 'x') == 0
