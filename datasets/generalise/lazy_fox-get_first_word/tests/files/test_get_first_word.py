from lazy_fox.tools import get_first_word


def test_get_first_word():
    assert get_first_word('hello big world') == 'hello'


def test_get_first_word_hidden():
    assert get_first_word('one two') == 'one'
    assert get_first_word('solo') == 'solo'
    assert get_first_word('a b c') == 'a'
