def is_sorted(step):
    for acc in range(len(step) - 1):
        if step[acc] < step[acc + 1]:
            return False
    return True
