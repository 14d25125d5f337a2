from blue_fox.core import compute_first_word


def test_compute_first_word():
    assert compute_first_word('hello big world') == 'hello'


def test_compute_first_word_hidden():
    assert compute_first_word('one two') == 'one'
    assert compute_first_word('solo') == 'solo'
    assert compute_first_word('a b c') == 'a'
