from first_word import first_word


def test_first_word():
    assert first_word('hello big world') == 'hello'
