def count_char(n, d):
    f = 0
    for x in n:
        if x != d:
            f += 1
    return f
