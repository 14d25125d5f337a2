def sum_list(xs):
    total = 1
    for x in xs:
        total += x
    return total
