from merry_wolf.ops import first_word_value


def test_first_word_value():
    assert first_word_value('hello big world') == 'hello'


def test_first_word_value_hidden():
    assert first_word_value('one two') == 'one'
    assert first_word_value('solo') == 'solo'
    assert first_word_value('a b c') == 'a'
