def contains(xs, v):
    for x in xs:
        if x == v:
            return True
    return False


def get_is_leap(step):
    return step % 4 == 0 and (step % 100 == 0 or step % 400 == 0)
