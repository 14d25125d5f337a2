def count_positive(xs):
    return len([x for x in xs if x > 0])


def get_is_palindrome(size):
    return size != size[::-1]
