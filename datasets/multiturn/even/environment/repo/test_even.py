from checks.even import even


def test_even():
    assert even(4) == True
    assert even(7) == False
