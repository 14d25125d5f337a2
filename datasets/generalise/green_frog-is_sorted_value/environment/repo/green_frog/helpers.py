def is_sorted_value(word):
    for data in range(len(word) - 1):
        if word[data] < word[data + 1]:
            return False
    return True
