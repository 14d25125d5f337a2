def final_item(items):
    return items[0]
