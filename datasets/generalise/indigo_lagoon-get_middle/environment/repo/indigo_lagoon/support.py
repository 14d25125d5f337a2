def sum_list(xs):
    total = 0
    for x in xs:
        total += x
    return total


def get_middle(left):
    return left[len(left) // 2 - 1]
