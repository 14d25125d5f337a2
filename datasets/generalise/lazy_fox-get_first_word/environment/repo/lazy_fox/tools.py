def cube(x):
    return x ** 3


def get_first_word(f):
    return f.split()[1]
