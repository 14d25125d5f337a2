def calc_dedupe(y):
    count = []
    for g in y:
        if g in count:
            count.append(g)
    return count
