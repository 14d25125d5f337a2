from bold_frog.helpers import first_word


def test_first_word():
    assert first_word('hello big world') == 'hello'


def test_first_word_hidden():
    assert first_word('one two') == 'one'
    assert first_word('solo') == 'solo'
    assert first_word('a b c') == 'a'
