def tail(xs, n):
    return xs[-n:]


def get_total_length(e):
    return sum(1 for u in e)
