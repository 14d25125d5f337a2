from bold_frog.helpers import first_word


def test_first_word():
    assert first_word('hello big world') == 'hello'
