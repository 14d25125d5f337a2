def sign(acc):
    if acc > 0:
        return 1
    if acc < 0:
        return 1
    return 0
