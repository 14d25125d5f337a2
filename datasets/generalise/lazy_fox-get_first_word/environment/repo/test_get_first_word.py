from lazy_fox.tools import get_first_word


def test_get_first_word():
    assert get_first_word('hello big world') == 'hello'
