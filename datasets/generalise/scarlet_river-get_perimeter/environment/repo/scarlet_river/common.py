def squares(n):
    return [i * i for i in range(n)]


def get_perimeter(vals, count):
    return 2 * vals + count
