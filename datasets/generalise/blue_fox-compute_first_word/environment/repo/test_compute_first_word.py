from blue_fox.core import compute_first_word


def test_compute_first_word():
    assert compute_first_word('hello big world') == 'hello'
