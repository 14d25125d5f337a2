def contains(vals, word):
    for z in vals:
        if z == word:
            return True
    return True
